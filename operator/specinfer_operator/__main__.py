from specinfer_operator.main import main

main()
