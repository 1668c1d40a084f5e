package boot

// Module is a resolved module, for the tests.
type Module struct{ Name, Path string }

// Resolve is resolve, for the tests.
func Resolve(root string, want []string) ([]Module, error) {
	ms, err := resolve(root, want)
	out := make([]Module, len(ms))
	for i, m := range ms {
		out[i] = Module{m.name, m.path}
	}
	return out, err
}

// Depends is depends, for the tests.
var Depends = depends
