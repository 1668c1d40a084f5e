package wasm

import (
	"context"
	"errors"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/kv"
)

// kvModule is the import module of the key-value host functions.
const kvModule = "sandbox_kv"

// WASI errno values the key-value functions return.
const (
	errnoSuccess = 0
	errnoAcces   = 2
	errnoFault   = 21
	errnoFbig    = 22
	errnoIO      = 29
	errnoNoent   = 44
	errnoRange   = 68
)

type kvReq struct {
	_   struct{} `cbor:",toarray"`
	NS  string
	Key []byte
}

type kvGetResp struct {
	_     struct{} `cbor:",toarray"`
	Value []byte
	Errno uint32
}

type kvPutReq struct {
	_     struct{} `cbor:",toarray"`
	NS    string
	Key   []byte
	Value addr.Addr
	Len   int
}

// instantiateKV provides:
//
//	get(ns, ns_len, key, key_len, buf, buf_cap, len_out) -> errno
//	put(ns, ns_len, key, key_len, val, val_len) -> errno
//	delete(ns, ns_len, key, key_len) -> errno
//
// get writes the value's length to len_out; ERANGE when buf_cap is too
// small (len_out then says how much is needed). Denied namespaces are
// EACCES, missing keys ENOENT.
//
// The functions are instantiated once per runtime; each call finds its
// run's broker in the call's context.
func instantiateKV(ctx context.Context, rt wazero.Runtime) error {
	read := func(m api.Module, p, n uint32) ([]byte, bool) {
		v, ok := m.Memory().Read(p, n)
		if !ok {
			return nil, false
		}
		return append([]byte(nil), v...), true
	}
	// begin reads a call's namespace and key and asks the grant.
	begin := func(ctx context.Context, m api.Module, nsP, nsL, kP, kL uint32, write bool) (*broker, *kv.Store, string, []byte, uint32) {
		b, store := fromContext(ctx)
		if b == nil {
			return nil, nil, "", nil, errnoIO
		}
		ns, ok1 := read(m, nsP, nsL)
		key, ok2 := read(m, kP, kL)
		if !ok1 || !ok2 {
			return nil, nil, "", nil, errnoFault
		}
		if b.enf.KV(string(ns), write) != nil {
			return nil, nil, "", nil, errnoAcces
		}
		return b, store, string(ns), key, errnoSuccess
	}
	get := func(ctx context.Context, m api.Module, nsP, nsL, kP, kL, bufP, bufCap, lenOut uint32) uint32 {
		b, store, ns, key, e := begin(ctx, m, nsP, nsL, kP, kL, false)
		if e != errnoSuccess {
			return e
		}
		r, ok := do(b, "kv.get", kvReq{NS: ns, Key: key}, func() kvGetResp {
			v, err := storeGet(store, ns, key)
			return kvGetResp{Value: v, Errno: kvErrno(err)}
		})
		if !ok {
			return errnoIO
		}
		if r.Errno != errnoSuccess {
			return r.Errno
		}
		if !m.Memory().WriteUint32Le(lenOut, uint32(len(r.Value))) {
			return errnoFault
		}
		if uint32(len(r.Value)) > bufCap {
			return errnoRange
		}
		if !m.Memory().Write(bufP, r.Value) {
			return errnoFault
		}
		return errnoSuccess
	}
	put := func(ctx context.Context, m api.Module, nsP, nsL, kP, kL, vP, vL uint32) uint32 {
		val, ok := read(m, vP, vL)
		if !ok {
			return errnoFault
		}
		b, store, ns, key, e := begin(ctx, m, nsP, nsL, kP, kL, true)
		if e != errnoSuccess {
			return e
		}
		r, ok := do(b, "kv.put", kvPutReq{NS: ns, Key: key, Value: addr.Of(val), Len: len(val)}, func() uint32 {
			if store == nil {
				return errnoIO
			}
			return kvErrno(store.Put(ns, key, val))
		})
		if !ok {
			return errnoIO
		}
		return r
	}
	del := func(ctx context.Context, m api.Module, nsP, nsL, kP, kL uint32) uint32 {
		b, store, ns, key, e := begin(ctx, m, nsP, nsL, kP, kL, true)
		if e != errnoSuccess {
			return e
		}
		r, ok := do(b, "kv.delete", kvReq{NS: ns, Key: key}, func() uint32 {
			if store == nil {
				return errnoIO
			}
			return kvErrno(store.Delete(ns, key))
		})
		if !ok {
			return errnoIO
		}
		return r
	}
	_, err := rt.NewHostModuleBuilder(kvModule).
		NewFunctionBuilder().WithFunc(get).Export("get").
		NewFunctionBuilder().WithFunc(put).Export("put").
		NewFunctionBuilder().WithFunc(del).Export("delete").
		Instantiate(ctx)
	return err
}

type brokerKey struct{}

func fromContext(ctx context.Context) (*broker, *kv.Store) {
	b, _ := ctx.Value(brokerKey{}).(*broker)
	if b == nil {
		return nil, nil
	}
	return b, b.kv
}

func storeGet(s *kv.Store, ns string, key []byte) ([]byte, error) {
	if s == nil {
		return nil, kv.ErrNotFound
	}
	return s.Get(ns, key)
}

func kvErrno(err error) uint32 {
	switch {
	case err == nil:
		return errnoSuccess
	case errors.Is(err, kv.ErrNotFound):
		return errnoNoent
	case errors.Is(err, kv.ErrTooLarge):
		return errnoFbig
	}
	return errnoIO
}
