"""Local servers that follow the documented list contracts of real public APIs."""
