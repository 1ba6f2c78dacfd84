"""zigcorn: an ASGI server whose I/O engine is written in Zig.

A drop-in for uvicorn: ``zigcorn.run(app, host=..., port=...)`` and the ``zigcorn``
command take uvicorn's names. Importing the package loads only configuration and
the CLI entry points; asyncio, argparse and the engine load when a server starts.
"""

__version__ = "0.1.0"

from zigcorn.config import Config  # noqa: E402 - after __version__, which main.py reads
from zigcorn.main import main, run  # noqa: E402

__all__ = ["Config", "main", "run", "__version__"]
