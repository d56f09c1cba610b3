"""spec.learning in the operator: which draft generation serves, and when the next one is trained."""
