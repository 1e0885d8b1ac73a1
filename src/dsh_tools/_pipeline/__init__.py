"""The call path: one tool call through the five stages, and the plans it runs on."""
