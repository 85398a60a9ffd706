"""Built-in dsh plugins: tools, the file fence and process confinement."""
