from memtune.cli import main

raise SystemExit(main())
