from rftbus.cli.main import main

main()
