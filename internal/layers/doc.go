// Package layers holds the rules of where code goes (docs/architecture.md)
// and the test that enforces them on the module's imports: it has no
// code of its own.
//
// The rules, each checked by TestImportRules:
//
//   - leaves (the vocabulary every layer shares) import nothing of the
//     module;
//   - internal/errs, the one category map, imports nothing of the module
//     but the reject codes;
//   - a backend (bare, native, wasm, vm, and what is below each) never
//     imports another backend, and nothing but the built-in list and the
//     tests' helpers imports a backend;
//   - the engine (internal/host) imports no backend, and none of live,
//     server, mcp; live imports none of server, mcp;
//   - the client and the MCP server are thin: the client imports nothing
//     of the module, mcp only the client and errs;
//   - the SPDM verifier (evidence/spdm) imports nothing of the module
//     but the reject codes;
//   - the public packages import internal packages only from the
//     formats they are written in;
//   - no package that is not a test imports a test helper package.
package layers
