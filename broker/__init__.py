"""pyrmq broker package."""
