"""One blueprint per URL area; the blueprint's name is its module's name."""
