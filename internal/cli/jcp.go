package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/jcp"
)

// Presentation reads a chain file and signs its invocation as the
// principal as (a key kept in the state directory); nil without a file.
func (g *Globals) Presentation(file, as string) (*client.JCP, error) {
	switch {
	case file == "" && as == "":
		return nil, nil
	case file == "" || as == "":
		return nil, errs.Usage{Err: errors.New("--jcp FILE and --as NAME go together: the chain, and the principal presenting it")}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	els, err := jcp.DecodeChain(b)
	if err != nil || len(els) == 0 {
		return nil, errs.Usage{Err: fmt.Errorf("--jcp %s: not a chain file: %v", file, err)}
	}
	leaf, err := jcp.Open(els[len(els)-1])
	if err != nil || leaf.Grant == nil {
		return nil, errs.Usage{Err: fmt.Errorf("--jcp %s: its last element is not a grant: %v", file, err)}
	}
	d, err := g.StateDir()
	if err != nil {
		return nil, err
	}
	k, err := d.Principal(as)
	if err != nil {
		return nil, errs.Usage{Err: err}
	}
	if k.Public() != leaf.Grant.Aud {
		return nil, errs.Usage{Err: fmt.Errorf("--as %s: %s is not the audience of the chain's last grant (%s)", as, k.Public(), leaf.Grant.Aud)}
	}
	inv, err := jcp.Seal(&jcp.Invocation{Grant: leaf.ID, Iat: uint64(time.Now().Unix())}, k)
	if err != nil {
		return nil, err
	}
	return &client.JCP{Chain: els, Invocation: inv.Bytes}, nil
}
