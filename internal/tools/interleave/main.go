package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// times are one program's runs.
type times struct {
	wall, cpu []time.Duration
}

func main() {
	n := flag.Int("n", 300, "timed runs of each program")
	warm := flag.Int("w", 10, "untimed runs of each program first")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: interleave [-n RUNS] [-w WARMUPS] 'PROGRAM [ARG]...'...\n\n"+
			"Time the programs, one run of each in turn.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || *n < 1 || *warm < 0 {
		flag.Usage()
		os.Exit(2)
	}
	progs := make([][]string, flag.NArg())
	for i, a := range flag.Args() {
		f := strings.Fields(a)
		if len(f) == 0 {
			fmt.Fprintln(os.Stderr, "interleave: an empty program")
			os.Exit(2)
		}
		p, err := exec.LookPath(f[0])
		if err != nil {
			fmt.Fprintf(os.Stderr, "interleave: %v\n", err)
			os.Exit(1)
		}
		progs[i] = append([]string{p}, f[1:]...)
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "interleave: %v\n", err)
		os.Exit(1)
	}
	ts := make([]times, len(progs))
	for r := range *warm + *n {
		for i, p := range progs {
			t0 := time.Now()
			proc, err := os.StartProcess(p[0], p, &os.ProcAttr{Files: []*os.File{nil, null, null}})
			if err != nil {
				fmt.Fprintf(os.Stderr, "interleave: %v\n", err)
				os.Exit(1)
			}
			st, err := proc.Wait()
			wall := time.Since(t0)
			if err != nil || !st.Success() {
				fmt.Fprintf(os.Stderr, "interleave: %s: %v%v\n", flag.Arg(i), err, st)
				os.Exit(1)
			}
			if r >= *warm {
				ts[i].wall = append(ts[i].wall, wall)
				ts[i].cpu = append(ts[i].cpu, st.UserTime()+st.SystemTime())
			}
		}
	}
	fmt.Printf("%d runs of each, in turn, after %d warm-ups: median [mean, 10th percentile] wall; median CPU\n", *n, *warm)
	first := median(ts[0].wall)
	for i, t := range ts {
		m := median(t.wall)
		fmt.Printf("  %-45s %s ms [%s, %s]  cpu %s ms  %.2fx\n", flag.Arg(i), ms(m), ms(mean(t.wall)), ms(percentile(t.wall, 10)), ms(median(t.cpu)), float64(m)/float64(first))
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%5.2f", float64(d)/float64(time.Millisecond)) }

func median(ds []time.Duration) time.Duration { return percentile(ds, 50) }

// percentile is the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}
