"""The PySpark audit of the broker's dead-letter log."""
