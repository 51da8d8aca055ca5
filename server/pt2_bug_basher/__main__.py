from pt2_bug_basher.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
