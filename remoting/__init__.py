"""pyrmq remoting package."""
