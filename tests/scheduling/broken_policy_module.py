"""A module that fails while importing, for the policy loader's error path."""

raise RuntimeError("this module is broken on purpose")
