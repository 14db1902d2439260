"""Executes every notebook under notebooks/ with nbclient, so that none can rot.

Run by scripts/test.sh with the project's Python environment. Exits non-zero naming the
notebook and the failing cell."""

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

root = Path(__file__).resolve().parent.parent
failed = 0
notebooks = sorted((root / "notebooks").glob("*.ipynb"))
for path in notebooks:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
        print(f"notebook {path.relative_to(root)}: ok")
    except CellExecutionError as error:
        failed += 1
        print(f"notebook {path.relative_to(root)}: FAILED\n{error}", file=sys.stderr)
print(f"notebooks: {len(notebooks) - failed} passed, {failed} failed")
sys.exit(1 if failed or not notebooks else 0)
