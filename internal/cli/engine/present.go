package engine

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
)

// presenter is a JCP chain and the principal that presents it: the
// audience of its last grant, whose key is kept in the state directory.
type presenter struct {
	Elements [][]byte   // the chain, root first
	Leaf     *jcp.Token // its last grant
	Key      key.Private
}

// newPresenter reads a chain file and the key of the principal as (kept
// in the state directory), which must be the audience of the chain's
// last grant; nil without a file.
func newPresenter(g *cli.Globals, file, as string) (*presenter, error) {
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
	return &presenter{Elements: els, Leaf: leaf, Key: k}, nil
}

// Present signs a fresh invocation of the chain: each call its own.
func (p *presenter) Present() (*client.JCP, error) {
	inv, err := jcp.Seal(&jcp.Invocation{Grant: p.Leaf.ID, Iat: uint64(time.Now().Unix())}, p.Key)
	if err != nil {
		return nil, err
	}
	return &client.JCP{Chain: p.Elements, Invocation: inv.Bytes}, nil
}

// presentHere reads a chain file and signs its invocation as the
// principal as (a key kept in the state directory); nil without a file.
func presentHere(g *cli.Globals, file, as string) (*client.JCP, error) {
	p, err := newPresenter(g, file, as)
	if p == nil || err != nil {
		return nil, err
	}
	return p.Present()
}
