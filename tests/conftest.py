"""The suite's broker comes from cadenza's own pytest plugin, the one users get too."""

pytest_plugins = ["cadenza.testing.pytest_plugin"]
