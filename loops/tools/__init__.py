"""The commands a loop runs and where: validators (`validators`), the workspace they run in (`workspace`), what the
loop reads of pytest (`pytest_reading`) and the child subreaper commands run under on Linux (`reaper`).
"""

__all__: list[str] = []
