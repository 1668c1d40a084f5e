package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/mcp"
	"github.com/opensubstrate/sandbox/internal/server"
)

func mcpCmd(g *globals) *cobra.Command {
	var httpAddr, tokenFile, policyFile string
	c := &cobra.Command{
		Use:   "mcp [--policy FILE] [--http ADDR --token-file FILE]",
		Short: "Serve the sandbox's tools to an MCP client (stdio, or streamable HTTP)",
		Long: `Serve the Model Context Protocol: an agent's MCP client gets tools to
create a sandbox (create_sandbox), run a command in it with its output
(exec), read, write and list its files (read_file, write_file,
list_files), suspend, resume and close it, list them (list_sandboxes),
verify a sealed run (verify_run) and show its energy receipt
(show_receipt).

Every tool calls the running service ('sandbox serve', found as the
other commands find it) through its API, as the CLI does: the same
grants, owner and limits. A failure is a JSON-RPC error whose code is
its category's (invalid -32602, not-found -32010, integrity -32011,
untrusted -32012, denied -32013, unavailable -32014, canceled -32015,
limit -32016, internal -32603), its data naming the category; a
command that exits non-zero is a result. An exec's output is cut at
1 MiB per stream (said when cut); a file read or written at 4 MiB. A
client that goes away mid-exec interrupts the exec, which is sealed.

By default it speaks over standard input and output (an MCP client
starts it). --http ADDR serves streamable HTTP at http://ADDR/mcp on a
loopback address only, and needs --token-file (one bearer token per
line, 16 characters or more): every request must carry one. Its
callers act as the service's own user.

Each connection is a principal held to a policy (docs/mcp.md): what its
model may grant in create_sandbox, and what a sandbox it acts in may
hold. By default that is the policy of a token with none: no host
directory beyond its own sandboxes' workspaces, no network, no secret,
no key-value namespace; S1, S2 and S5; the CPU at any budget. --policy
FILE gives the connections another (sandbox.policy/1); over --http, a
token-file line may name its token's own policy after it. A tool's
arguments are the model's: they can only narrow the connection's
policy, never widen it. The service checks every grant against it and
refuses the rest as denied (-32013), naming the grant and the rule.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var tokens []authority.Token
			policy := authority.Default()
			if policyFile != "" {
				b, err := os.ReadFile(policyFile)
				if err == nil {
					policy, err = authority.Parse(b)
				}
				if err != nil {
					return errs.Usage{Err: fmt.Errorf("--policy %s: %w", policyFile, err)}
				}
			}
			if httpAddr != "" {
				if tokenFile == "" {
					return errs.Usage{Err: errors.New("--http needs --token-file: the tools act as the service's own user")}
				}
				host, _, err := net.SplitHostPort(httpAddr)
				if err != nil {
					return errs.Usage{Err: fmt.Errorf("--http %q: %w", httpAddr, err)}
				}
				if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
					return errs.Usage{Err: fmt.Errorf("--http %q: a loopback address only (127.0.0.1, ::1, localhost)", httpAddr)}
				}
				if tokens, err = readTokens(tokenFile); err != nil {
					return err
				}
			} else if tokenFile != "" {
				return errs.Usage{Err: errors.New("--token-file is for --http")}
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// Every call of a connection carries its policy: the service
			// holds the connection to it.
			narrowed := func(p authority.Policy) (*sdk.Server, error) {
				doc, err := p.Marshal()
				if err != nil {
					return nil, err
				}
				return mcp.New(cl.Narrowed(doc), versionOf().Version), nil
			}
			if httpAddr == "" {
				srv, err := narrowed(policy)
				if err != nil {
					return err
				}
				return srv.Run(ctx, &sdk.StdioTransport{})
			}
			servers := map[string]*sdk.Server{}
			for _, t := range tokens {
				p := policy
				if t.PolicyFile != "" {
					p = t.Policy
				}
				if servers[t.Secret], err = narrowed(p); err != nil {
					return err
				}
			}
			ln, err := net.Listen("tcp", httpAddr)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			mux := http.NewServeMux()
			mux.Handle("/mcp", bearer(secrets(tokens), sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
				tok, _ := server.Bearer(r, secrets(tokens))
				return servers[tok]
			}, &sdk.StreamableHTTPOptions{Logger: log})))
			hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			log.Info("serving MCP", "url", "http://"+ln.Addr().String()+"/mcp")
			errc := make(chan error, 1)
			go func() { errc <- hs.Serve(ln) }()
			select {
			case <-ctx.Done():
				hs.Close()
				return nil
			case err := <-errc:
				return err
			}
		},
	}
	c.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP on this loopback address (host:port) instead of stdio")
	c.Flags().StringVar(&tokenFile, "token-file", "", "bearer tokens for --http, one per line, each optionally followed by its policy file")
	c.Flags().StringVar(&policyFile, "policy", "", "the policy every connection is held to (default: a token's default: nothing on the host beyond its own sandboxes' workspaces)")
	return c
}

// bearer lets through requests that carry one of tokens.
func bearer(tokens []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, found := server.Bearer(r, tokens); !found {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-mcp"`)
			http.Error(w, "a bearer token from --token-file is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
