package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/errs"
)

// The preservation commands (seed 004): seeding a sandbox with a git
// checkout bound to an owner, and the passive receipt of what is kept.

// claimFlags are an owner claim's fields as flags: all or none.
type claimFlags struct {
	run, requester, thread, repository, head string
}

func (f *claimFlags) add(c *cobra.Command, what string) {
	c.Flags().StringVar(&f.run, "run", "", "the owner claim's run ("+what+")")
	c.Flags().StringVar(&f.requester, "requester", "", "the owner claim's requester")
	c.Flags().StringVar(&f.thread, "thread", "", "the owner claim's thread")
	c.Flags().StringVar(&f.repository, "repository", "", "the owner claim's repository name (e.g. acme/widgets)")
	c.Flags().StringVar(&f.head, "head", "", "the commit the ref resolved to, in full (40 or 64 hex digits)")
}

// claim is the claim the flags give, nil when none is.
func (f *claimFlags) claim(ref string) (*client.Claim, error) {
	fields := map[string]string{"--run": f.run, "--requester": f.requester, "--thread": f.thread, "--repository": f.repository, "--head": f.head}
	var set, unset []string
	for _, k := range []string{"--run", "--requester", "--thread", "--repository", "--head"} {
		if fields[k] != "" {
			set = append(set, k)
		} else {
			unset = append(unset, k)
		}
	}
	if len(set) == 0 {
		return nil, nil
	}
	if len(unset) > 0 {
		return nil, errs.Usage{Err: fmt.Errorf("an owner claim needs %s too (given: %s)", strings.Join(unset, ", "), strings.Join(set, ", "))}
	}
	return &client.Claim{Run: f.run, Requester: f.requester, Thread: f.thread, Repository: f.repository, Ref: ref, Head: f.head}, nil
}

func seedCmd(g *globals) *cobra.Command {
	var (
		spec       client.SeedSpec
		cf         claimFlags
		bearerFile string
		asJSON     bool
	)
	c := &cobra.Command{
		Use:   "seed SANDBOX --source REPO --ref BRANCH [--run R --requester U --thread T --repository NAME --head COMMIT]",
		Short: "Seed a live sandbox's workspace with a git checkout bound to an owner",
		Long: `Seed a live S1 sandbox's workspace with a checkout of a git repository
(docs/preservation.md). --source is an absolute path the sandbox may read
(it was created with fs:PATH:ro) or an https URL it may reach (a net
grant), with no credential in it; --bearer-file gives a token for an
https fetch, used once on git's standard input and never stored.

The owner claim (--run, --requester, --thread, --repository, --head: all
or none) is yours to give from what you trust, never from what the
sandbox ran. The seed is marked in the sandbox's lifecycle record before
the workspace is touched; git runs inside the sandbox, confined, each
step a sealed exec; the claim binds only when the checkout's head is
--head. --origin binds a credential-free https remote to the owner
(default: --source when it is an https URL). Without a claim the seed
works but has no owner: it stays protected (never parked for idleness)
and its receipt is unknown.

Seeding again with the same claim, source, ref, origin (and
--incarnation, if given) answers as the first seed did and leaves the
checkout as it is, even if its HEAD moved; anything else is refused
before the checkout or origin is touched.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := cf.claim(spec.Ref)
			if err != nil {
				return err
			}
			spec.Claim = cl
			if bearerFile != "" {
				b, err := os.ReadFile(bearerFile)
				if err != nil {
					return errs.Usage{Err: fmt.Errorf("--bearer-file: %w", err)}
				}
				spec.Bearer = strings.TrimSpace(string(b))
				if spec.Bearer == "" {
					return errs.Usage{Err: errors.New("--bearer-file is empty")}
				}
			}
			return callService(cmd, g, asJSON, func(c *client.Client) (*client.Seeded, error) { return c.Seed(cmd.Context(), args[0], spec) },
				func(s *client.Seeded) string {
					what := "seeded"
					if s.Cached {
						what = "already seeded (the first seed's answer; the checkout untouched)"
					}
					return fmt.Sprintf("%s %s: %s at %s, incarnation %s", s.Sandbox, what, s.State, s.Head, s.Incarnation)
				})
		},
	}
	c.Flags().StringVar(&spec.Source, "source", "", "the repository: an absolute path or an https URL")
	c.Flags().StringVar(&spec.Ref, "ref", "", "the branch to check out (Git's branch-name rules; '+' is fine)")
	c.Flags().StringVar(&spec.Origin, "origin", "", "a credential-free https remote to bind to the owner")
	c.Flags().StringVar(&spec.Incarnation, "incarnation", "", "on a retry: the incarnation the first seed answered")
	c.Flags().StringVar(&bearerFile, "bearer-file", "", "a file holding a token for an https fetch (never stored)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cf.add(c, "with --requester, --thread, --repository and --head")
	return c
}

func preservationCmd(g *globals) *cobra.Command {
	var (
		spec   client.ReceiptSpec
		cf     claimFlags
		ref    string
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "preservation SANDBOX --source REPO --ref BRANCH --run R --requester U --thread T --repository NAME --head COMMIT --incarnation I",
		Short: "Read the passive preservation receipt of a seeded sandbox",
		Long: `Print what is kept of a seeded sandbox for one exact owner claim, seed
source and incarnation: present (a complete checkpoint of it is stored),
lost (its record names a checkpoint no longer whole in the store) or
unknown. It is read from the sandbox's lifecycle record and the store
alone: it never wakes, starts or resumes the sandbox. A claim, source or
incarnation that is not the record's is refused, and learns nothing.
A receipt is never a permit to retire the sandbox.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := cf.claim(ref)
			if err != nil {
				return err
			}
			if cl == nil {
				return errs.Usage{Err: errors.New("a receipt is for an owner claim: give --run, --requester, --thread, --repository and --head")}
			}
			spec.Claim = *cl
			return callService(cmd, g, asJSON, func(c *client.Client) (*client.PreservationReceipt, error) {
				return c.Receipt(cmd.Context(), args[0], spec)
			}, func(r *client.PreservationReceipt) string {
				s := fmt.Sprintf("%s: %s (%s)", r.Sandbox, r.State, r.Reason)
				if r.Checkpoint != "" {
					s += fmt.Sprintf("\ncheckpoint %s, taken %s, kept until %s", r.Checkpoint, r.Taken.Format("2006-01-02T15:04:05Z"), r.RetainUntil.Format("2006-01-02"))
				}
				return s
			})
		},
	}
	c.Flags().StringVar(&spec.Source, "source", "", "the seed's source, as it was seeded")
	c.Flags().StringVar(&ref, "ref", "", "the claim's ref")
	c.Flags().StringVar(&spec.Incarnation, "incarnation", "", "the incarnation asked about")
	c.Flags().BoolVar(&asJSON, "json", false, "print the receipt as JSON")
	cf.add(c, "with --requester, --thread, --repository and --head")
	return c
}
