package egress

import "os"

func writeFile(p, v string) error { return os.WriteFile(p, []byte(v), 0o600) }
