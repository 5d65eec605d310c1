"""Domain code shared by every handler: table schema, records, the SessionStore, typed settings."""
