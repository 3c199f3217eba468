from analyzer.cli import run

run()
