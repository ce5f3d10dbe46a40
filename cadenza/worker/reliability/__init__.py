"""What keeps a worker's failures contained: poison-pill quarantine, the crash slot that names the
record a dead process was running, and the loop watch that counts stalls."""
