"""What a run is made of and judged by: what it spends (`usage`) and its one clock (`deadline`), its limits (`budget`),
the run in progress as every engine and tool reads it (`context`), what the runtime needs of a model (`profile`,
`adapters`), the contracts of phases and calls (`contracts`, `input_contracts`), a user's checks (`checks`,
`builtin_checks`), the floor under LLM judges (`junk`), how results render (`display`) and what optimizers see of a
loop (`demos`).
"""

__all__: list[str] = []
