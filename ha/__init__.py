"""pyrmq ha package."""
