"""JSON Schema validators compiled once: closures, and generated source in front of them."""
