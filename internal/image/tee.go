package image

import (
	"encoding/hex"
	"hash"

	"github.com/opensubstrate/sandbox/reject"
)

// lazyVerifier hashes what is written to it and checks it against want.
type lazyVerifier struct {
	h     hash.Hash
	want  digest
	where string
}

func (v *lazyVerifier) Write(b []byte) (int, error) {
	if v.h == nil {
		v.h = v.want.hasher()
	}
	return v.h.Write(b)
}

func (v *lazyVerifier) check() error {
	if v.h == nil {
		v.h = v.want.hasher()
	}
	if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want.hex {
		return reject.New(reject.Address, v.where, "the layer's tar stream hashes to %s:%s…, not %s…: the layer is not the one the config names", v.want.alg, got[:16], v.want.String()[:23])
	}
	return nil
}
