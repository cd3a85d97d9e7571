"""``python -m lodtool`` runs the CLI."""

if __name__ == "__main__":
    from .cli.main import main

    main()
