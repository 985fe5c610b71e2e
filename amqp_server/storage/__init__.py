"""Durable state: definitions, the persistent message log, the dead-letter log."""
