"""Tool parameters as JSON Schema: the typed DSL, the enforced subset, the validators compiled
once (closures, and generated source in front of them) and the arguments model of each tool."""
