from specinfer_operator.manager.main import main

main()
