from corral.cli import main

raise SystemExit(main())
