"""Policies: the model, name matching, precedence, and the amqpctl CLI."""
