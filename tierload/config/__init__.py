"""Configuration: the pydantic models (the one source of defaults), precedence, file checks, and
the tier locations' separation rules."""
