"""The ground floor: DNA text, species/region tags and the Carbon token codec (no model, no torch weights)."""
