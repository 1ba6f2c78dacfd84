"""``python -m zigcorn APP [options]``: the same CLI as the ``zigcorn`` command."""

from zigcorn.main import main

if __name__ == "__main__":
    main()
