"""Dead-letter semantics as pure functions: message, queue settings, reason
and clock in; new headers, routing keys and target, or a drop, out.  No I/O
and no event loop here (see DESIGN.md)."""
