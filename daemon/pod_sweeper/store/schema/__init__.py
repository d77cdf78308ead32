"""The schema's owner: ``migrations`` (the runner, and the schema check at start-up) and ``roles``
(the runtime role's grants)."""
