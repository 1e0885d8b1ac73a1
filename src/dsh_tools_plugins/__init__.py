"""First-party dsh-tools plugins: policies and reference tools, each its own module."""
