"""python -m planner: planner.serve (its worker processes import that module, not this one)."""

from planner.serve import serve

if __name__ == "__main__":
    raise SystemExit(serve())
