from loops.cli import main

main()
