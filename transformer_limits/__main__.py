from transformer_limits.cli import main

raise SystemExit(main())
