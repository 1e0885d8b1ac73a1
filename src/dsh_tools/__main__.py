"""``python -m dsh_tools``: the same as the ``dsh-tools`` command."""

from .cli import console_main

if __name__ == "__main__":
    console_main()
