"""A run on disk, to resume: what a checkpoint keeps and the rules every store applies (`checkpoint_records`), the
SQLite store (`checkpoint_store`), and replay from them (`checkpoint`).
"""

__all__: list[str] = []
