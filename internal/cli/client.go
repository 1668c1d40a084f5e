package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/reject"
)

// EnvHost names the service the CLI talks to: a unix socket's path or
// an https:// URL (with $SANDBOX_TOKEN).
const EnvHost = "SANDBOX_HOST"

// NoService is the error of a command that needs a service when there
// is none to talk to.
type NoService struct{ Where string }

func (e NoService) Error() string {
	return fmt.Sprintf("no sandbox service is running (%s): start one with 'sandbox serve &' (live sandboxes live in it), or point $%s at one", e.Where, EnvHost)
}

// Unavailable: there is no service.
func (NoService) Unavailable() bool { return true }

// Client finds the service: $SANDBOX_HOST, else the state directory's
// socket when something answers on it.
func (g *Globals) Client() (*client.Client, error) {
	if h := os.Getenv(EnvHost); h != "" {
		o := client.Options{Token: os.Getenv("SANDBOX_TOKEN")}
		if g.engine != nil {
			o.DialTLS = g.engine.DialTLS
		}
		return client.Dial(h, o)
	}
	return g.ownClient()
}

// ownClient is the state directory's own service (its socket), if one
// is there.
func (g *Globals) ownClient() (*client.Client, error) {
	d, err := g.StateDir()
	if err != nil {
		return nil, err
	}
	sock := d.Path(client.SocketName)
	if _, err := os.Stat(sock); err != nil {
		return nil, NoService{"no socket at " + sock}
	}
	return client.Dial(sock, client.Options{})
}

// Service is the running service the CLI talks to, if any: the one
// $SANDBOX_HOST names (forced: it must answer), else the state
// directory's socket when there is one.
func (g *Globals) Service() (cl *client.Client, forced bool, err error) {
	forced = os.Getenv(EnvHost) != ""
	cl, err = g.Client()
	if !forced && errors.As(err, new(NoService)) {
		return nil, false, nil
	}
	return cl, forced, err
}

// APIErr turns a service's error into the CLI's: the category decides
// the exit status, as for an in-process error.
func APIErr(err error) error {
	if err == nil {
		return nil
	}
	var ae *client.APIError
	if errors.As(err, &ae) {
		return categorized{ae}
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return NoService{err.Error()} // a socket nothing serves on, or none
	}
	return err
}

// categorized carries a service error's category to errs.Of.
type categorized struct{ e *client.APIError }

func (c categorized) Error() string { return c.e.Message }
func (c categorized) Invalid() bool { return c.e.Category == "invalid" }
func (c categorized) Unavailable() bool {
	return c.e.Category == "unavailable"
}
func (c categorized) Limit() bool { return c.e.Category == "limit" }
func (c categorized) Unwrap() error {
	switch c.e.Category {
	case "not-found":
		return os.ErrNotExist
	case "denied":
		return grant.ErrDenied
	case "canceled":
		return context.Canceled
	case "integrity":
		return reject.New(reject.Invalid, "", "%s", c.e.Message) // exit 4
	case "untrusted":
		return reject.UntrustedKey
	}
	return nil
}

// callService makes one call of the running service and says what it
// answered: as JSON, or as one line.
func callService[T any](cmd *cobra.Command, g *Globals, asJSON bool, call func(*client.Client) (T, error), line func(T) string) error {
	cl, err := g.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	v, err := call(cl)
	if err != nil {
		return APIErr(err)
	}
	if asJSON {
		return PrintJSON(cmd.OutOrStdout(), v)
	}
	fmt.Fprintln(cmd.OutOrStdout(), line(v))
	return nil
}

// PrintList prints l as a JSON array (empty for none) or as a table
// under header, a row each.
func PrintList[T any](cmd *cobra.Command, asJSON bool, l []T, header string, row func(T) string) error {
	if asJSON {
		if l == nil {
			l = []T{}
		}
		return PrintJSON(cmd.OutOrStdout(), l)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, x := range l {
		fmt.Fprintln(tw, row(x))
	}
	return tw.Flush()
}
