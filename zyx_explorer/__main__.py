from zyx_explorer.cli import main

raise SystemExit(main())
