package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"github.com/onsi/gomega/gexec"
)

// These specs run `kubectl turnstile run` as a CI runner does, on real process trees, and judge
// each one from the commands' own records: every process of a tree carries E2E_TREE=<key>-<id>
// in its environment (inherited by every descendant, whatever its group or session), writes its
// start, a heartbeat while it runs and its end to the tree's log, and the first thing a tree does
// is look in /proc for a live process of another tree on its key. No moment with two trees alive
// on one key means: no tree found another alive, and every record of the first tree is older
// than the second tree's start.

// treeLog is one tree's records.
type treeLog struct {
	id      string
	start   time.Time
	last    time.Time // the newest record of the tree: its last sign of life
	overlap []string  // live processes of other trees it found when it started
}

// runTrees is the trees of one key in one spec.
type runTrees struct {
	dir, key string
}

func newRunTrees() *runTrees {
	GinkgoHelper()
	t := &runTrees{dir: GinkgoT().TempDir(), key: "k" + randSuffix()}
	alive := `i=0; while [ $i -lt $1 ]; do echo "alive $(date +%s%N) $$" >> $L; sleep 0.1; i=$((i+1)); done`
	Expect(os.WriteFile(filepath.Join(t.dir, "alive.sh"), []byte(alive), 0o600)).To(Succeed())
	// "$aliveFor S" beats until S seconds have passed, however slowly a loaded machine forks.
	aliveFor := `end=$(($(date +%s) + $1)); while [ "$(date +%s)" -lt $end ]; do echo "alive $(date +%s%N) $$" >> $L; sleep 0.1; done`
	Expect(os.WriteFile(filepath.Join(t.dir, "alive-for.sh"), []byte(aliveFor), 0o600)).To(Succeed())
	DeferCleanup(t.killAll)
	return t
}

// command is the argv of a tree: a shell that looks for other trees' live processes, records
// its start, runs body (in which "$alive N" writes a heartbeat N times, 100 ms apart, from a
// process of its own, and "$aliveFor S" for S seconds) and records its end.
func (t *runTrees) command(id, body string) []string {
	script := fmt.Sprintf(`L=%[1]s/%[2]s.log; export L; alive="sh %[1]s/alive.sh"; aliveFor="sh %[1]s/alive-for.sh"; export alive aliveFor
others=$(grep -haoz '^E2E_TREE=%[3]s-[a-z0-9]*' /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -vx 'E2E_TREE=%[3]s-%[2]s' | sort -u | tr '\n' ' ')
[ -n "$others" ] && echo "overlap $(date +%%s%%N) $others" >> $L
echo "start $(date +%%s%%N) $$" >> $L
%[4]s
code=$?
echo "end $(date +%%s%%N) $$" >> $L
exit $code`, t.dir, id, t.key, body)
	return []string{"env", "E2E_TREE=" + t.key + "-" + id, "sh", "-c", script}
}

// read parses a tree's log.
func (t *runTrees) read(id string) treeLog {
	GinkgoHelper()
	b, err := os.ReadFile(filepath.Join(t.dir, id+".log"))
	Expect(err).NotTo(HaveOccurred(), "tree %s never started", id)
	l := treeLog{id: id}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		Expect(err).NotTo(HaveOccurred(), "bad record %q", line)
		at := time.Unix(0, ns)
		switch f[0] {
		case "overlap":
			l.overlap = append(l.overlap, strings.Join(f[2:], " "))
		case "start":
			if l.start.IsZero() {
				l.start = at
			}
		}
		if at.After(l.last) {
			l.last = at
		}
	}
	return l
}

// expectSerial asserts that the trees ran one after the other, in this order, with no moment
// when two were alive, and returns the gaps between one tree's last sign of life and the next
// one's start.
func (t *runTrees) expectSerial(ids ...string) []time.Duration {
	GinkgoHelper()
	var gaps []time.Duration
	var prev *treeLog
	for _, id := range ids {
		l := t.read(id)
		Expect(l.overlap).To(BeEmpty(), "tree %s started while a process of another tree on its key was alive: %v", id, l.overlap)
		if prev != nil {
			Expect(l.start.After(prev.last)).To(BeTrue(), "tree %s started at %s, before tree %s's last record at %s",
				id, l.start.Format("15:04:05.000"), prev.id, prev.last.Format("15:04:05.000"))
			gaps = append(gaps, l.start.Sub(prev.last))
		}
		prev = &l
	}
	return gaps
}

// waitStarted waits until a tree has written a heartbeat: it started, and the traps its body
// sets before its first heartbeat are in place.
func (t *runTrees) waitStarted(id string) {
	GinkgoHelper()
	Eventually(func() bool {
		b, _ := os.ReadFile(filepath.Join(t.dir, id+".log"))
		return bytes.Contains(b, []byte("alive "))
	}).WithTimeout(30*time.Second).WithPolling(50*time.Millisecond).Should(BeTrue(), "tree %s never started", id)
}

// alive is the processes of the key's trees that are alive now.
func (t *runTrees) alive() []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		env, err := os.ReadFile(d + "/environ")
		if err != nil || !bytes.Contains(env, []byte("E2E_TREE="+t.key+"-")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAll kills what a failed spec left of its trees.
func (t *runTrees) killAll() {
	for _, pid := range t.alive() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// startRun starts `kubectl turnstile run ARGS -- COMMAND` in its own process group, as a CI
// runner starts a job, with kubeconfig (the admin's when empty).
func startRun(kubeconfigPath string, args []string, command []string) *gexec.Session {
	GinkgoHelper()
	if kubeconfigPath == "" {
		kubeconfigPath = kubeconfig
	}
	full := append(append([]string{"turnstile"}, args...), "--")
	cmd := exec.Command(kubectlBin, append(full, command...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigPath, "KUBECACHEDIR="+cacheDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s, err := gexec.Start(cmd, GinkgoWriter, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); s.Wait(5 * time.Second) })
	return s
}

var _ = Describe("kubectl turnstile run as a flock of the whole process tree", func() {
	var (
		ns    string
		trees *runTrees
		lock  string
	)
	BeforeEach(func() {
		ns = createNamespace()
		trees = newRunTrees()
		lock = "acme/infra:tree-" + randSuffix()
	})
	runArgs := func(owner string, extra ...string) []string {
		return append([]string{"-n", ns, "run", "-l", lock, "--owner", owner}, extra...)
	}
	// second starts the next holder once the first is granted and the second waits behind it.
	second := func(first *gexec.Session, extra ...string) *gexec.Session {
		GinkgoHelper()
		Eventually(first.Err, settle).Should(gbytes.Say("granted"))
		trees.waitStarted("a")
		b := startRun("", runArgs("bob", append([]string{"--pull", "2"}, extra...)...), trees.command("b", "$alive 3"))
		Eventually(b.Err, settle).Should(gbytes.Say("waiting"))
		return b
	}

	It("holds the lock until a child that ignores SIGTERM under a shell has exited (SIGTERM of run)", func() {
		a := startRun("", runArgs("alice", "--pull", "1", "--grace", "10s"),
			trees.command("a", `sh -c 'trap "" TERM; $alive 30' & wait`))
		b := second(a)
		By("SIGTERM to run: the shell dies of it, its child ignores it and lives on for a while")
		Expect(a.Command.Process.Signal(syscall.SIGTERM)).To(Succeed())
		Eventually(a, 30*time.Second).Should(gexec.Exit())
		Eventually(b, 30*time.Second).Should(gexec.Exit())
		gaps := trees.expectSerial("a", "b")
		Expect(a.ExitCode()).To(Equal(128+int(syscall.SIGTERM)), "the command's status: its shell died of SIGTERM")
		Expect(b.ExitCode()).To(Equal(0))
		GinkgoWriter.Printf("next tree started %s after the last process of the first\n", gaps[0])
	})

	It("waits for a grandchild that called setsid, and SIGKILLs it after --grace (SIGINT of run)", func() {
		a := startRun("", runArgs("alice", "--pull", "1", "--grace", "2s"),
			trees.command("a", `setsid sh -c 'trap "" TERM INT; $alive 300' & $alive 300`))
		b := second(a)
		Expect(a.Command.Process.Signal(syscall.SIGINT)).To(Succeed())
		Eventually(a, 30*time.Second).Should(gexec.Exit())
		Eventually(b, 30*time.Second).Should(gexec.Exit(0))
		trees.expectSerial("a", "b")
		Expect(trees.read("a").last.Sub(trees.read("a").start)).To(BeNumerically("<", 25*time.Second), "the setsid grandchild was not killed")
	})

	It("waits for what a double fork left behind after the command exited, and passes the command's status", func() {
		a := startRun("", runArgs("alice", "--pull", "1", "--grace", "2s"),
			trees.command("a", `(sh -c 'trap "" TERM; $alive 300' &); $alive 10; exit 3`))
		b := second(a)
		Eventually(a, 40*time.Second).Should(gexec.Exit())
		Eventually(b, 30*time.Second).Should(gexec.Exit())
		trees.expectSerial("a", "b")
		Expect(a.ExitCode()).To(Equal(3), "the command's status")
		Expect(b.ExitCode()).To(Equal(0))
		Expect(trees.alive()).To(BeEmpty())
	})

	It("stops the tree of a run killed with SIGKILL before its Lease lapses", SpecPriority(4), func() {
		a := startRun("", runArgs("alice", "--pull", "1", "--grace", "2s", "--lease-duration", "10s"),
			trees.command("a", `sh -c 'trap "" TERM; $alive 600' & $alive 600`))
		b := second(a)
		By("SIGKILL to run alone: no release, no forwarding; its keeper stops the tree")
		Expect(a.Command.Process.Signal(syscall.SIGKILL)).To(Succeed())
		Eventually(a, 10*time.Second).Should(gexec.Exit())
		Eventually(b, 40*time.Second).Should(gexec.Exit(0))
		trees.expectSerial("a", "b")
	})

	It("keeps the lock while a command runs longer than its ttl", SpecPriority(12), func() {
		// The holder Lease outlasts the ttl: what keeps the grant is the ttl's renewal. (With 8 s, an
		// API server too loaded to answer a renewal for 4 s had run rightly stop the command.)
		a := startRun("", runArgs("alice", "--pull", "1", "--name", "long", "--ttl", "12s", "--grace", "1s", "--lease-duration", "16s"),
			trees.command("a", `$aliveFor 30`))
		b := second(a)
		Eventually(a, 90*time.Second).Should(gexec.Exit())
		Eventually(b, 30*time.Second).Should(gexec.Exit())
		trees.expectSerial("a", "b")
		Expect(a.ExitCode()).To(Equal(0), "the command was not stopped at its ttl")
		Expect(b.ExitCode()).To(Equal(0))
		Expect(jsonpath(ns, "lr/long", "{.status.phase}/"+conditionField("Granted", "reason"))).To(Equal("Released/Released"),
			"the grant must be renewed while the command runs, and released when it ends")
		l := trees.read("a")
		Expect(l.last.Sub(l.start)).To(BeNumerically(">", 24*time.Second), "the command ran more than twice its ttl")
	})

	It("makes two runs of one identity wait for each other, and shares only when asked by name", func() {
		By("the same owner, no pull, no flag: the second run waits for the first tree")
		a := startRun("", runArgs("alice"), trees.command("a", `$alive 20`))
		Eventually(a.Err, settle).Should(gbytes.Say("granted"))
		trees.waitStarted("a")
		b := startRun("", runArgs("alice"), trees.command("b", `$alive 3`))
		Eventually(b.Err, settle).Should(gbytes.Say("waiting"))
		Eventually(a, 30*time.Second).Should(gexec.Exit(0))
		Eventually(b, 30*time.Second).Should(gexec.Exit(0))
		trees.expectSerial("a", "b")

		By("--session NAME given by both: they share the locks")
		c := startRun("", runArgs("alice", "--session", "deploy-7"), trees.command("c", `$alive 100`))
		Eventually(c.Err, settle).Should(gbytes.Say("granted"))
		trees.waitStarted("c")
		out, err := kubectl(append(append([]string{"turnstile"}, runArgs("alice", "--session", "deploy-7", "--nonblock")...), "--", "true")...)
		Expect(err).NotTo(HaveOccurred(), "the same session shares the lock: %s", out)
		Expect(c.Command.Process.Signal(syscall.SIGTERM)).To(Succeed())
		Eventually(c, 30*time.Second).Should(gexec.Exit())
	})

	It("shares with an earlier acquire of the same owner only with --share-with-same-owner", func() {
		mustKubectl("turnstile", "-n", ns, "acquire", "-l", lock, "--owner", "alice", "--pull", "5", "--name", "plan")
		_, err := kubectl("turnstile", "-n", ns, "run", "-l", lock, "--owner", "alice", "--pull", "5", "--nonblock", "--", "true")
		Expect(exitCode(err)).To(Equal(75), "a run is a holder of its own: busy, never granted (err: %v)", err)
		Expect(stderrOf(err)).To(ContainSubstring("not granted"))
		Expect(stderrOf(err)).To(ContainSubstring("give --share-with-same-owner"), "run says how to share")
		_, err = kubectl("turnstile", "-n", ns, "run", "-l", lock, "--owner", "alice", "--pull", "5", "-w", "0s", "-E", "9", "--", "true")
		Expect(exitCode(err)).To(Equal(9), "-E sets the code for never granted (err: %v)", err)
		out, err := kubectl("turnstile", "-n", ns, "run", "-l", lock, "--owner", "alice", "--pull", "5", "--share-with-same-owner", "--nonblock",
			"--", "sh", "-c", `echo "token=$TURNSTILE_FENCING_TOKEN lease=$TURNSTILE_HOLDER_LEASE"`)
		Expect(err).NotTo(HaveOccurred(), "the plan's holder applies under its lock")
		Expect(out).To(MatchRegexp(`token=[1-9][0-9]* lease=` + ns + `/turnstile-run-[0-9a-f]+`))
		Expect(jsonpath(ns, "lr/plan", "{.status.phase}")).To(Equal("Granted"), "the plan's lock is still held")
	})

	It("says why it cannot ask, within --request-timeout, with exit code 125; 127 for a missing command", func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(ln.Close) // accepts nothing: every connection hangs, as an unreachable server
		start := time.Now()
		cut := startRun(proxiedKubeconfig(ln.Addr().String()), append(runArgs("alice"), "--request-timeout", "3s"), []string{"true"})
		Eventually(cut, 30*time.Second).Should(gexec.Exit(125))
		GinkgoWriter.Printf("run gave up on an unreachable API server after %s\n", time.Since(start).Round(time.Millisecond))
		Expect(string(cut.Err.Contents())).To(ContainSubstring("could not write the holder Lease"))

		_, err = kubectl("turnstile", "-n", "no-such-namespace-"+randSuffix(), "run", "-l", lock, "--", "true")
		Expect(exitCode(err)).To(Equal(125))
		Expect(stderrOf(err)).To(ContainSubstring("not found"))

		_, err = kubectl("turnstile", "-n", ns, "run", "-l", lock, "--", "no-such-command-"+randSuffix())
		Expect(exitCode(err)).To(Equal(127))
		_, err = kubectl("turnstile", "-n", ns, "run", "-l", lock, "--grace", "30s", "--", "true")
		Expect(exitCode(err)).To(Equal(125))
		Expect(stderrOf(err)).To(ContainSubstring("--grace 30s does not fit in --lease-duration 40s"))
		Expect(jsonpath(ns, "lockrequests", "{.items[*].metadata.name}")).To(BeEmpty(), "nothing was asked for")
	})

	It("keeps the locks after a failed command with --keep-on-failure, saying why", SpecPriority(4), func() {
		_, err := kubectl("turnstile", "-n", ns, "run", "-l", lock, "--owner", "alice", "--name", "broken", "--keep-on-failure",
			"--lease-duration", "8s", "--grace", "1s",
			"--url", "https://ci.example.com/runs/7", "--", "sh", "-c", "exit 4")
		Expect(exitCode(err)).To(Equal(4))
		Expect(jsonpath(ns, "lr/broken", "{.status.phase}")).To(Equal("Granted"))
		Expect(jsonpath(ns, "lr/broken", "{.spec.reason}")).To(Equal("kept after a failed run: exit code 4 (https://ci.example.com/runs/7)"))
		Expect(jsonpath(ns, "lr/broken", `{.metadata.annotations.locks\.turnstile\.dev/exit-code}`)).To(Equal("4"))
		By("the holder Lease does not lapse when run is gone (8s lease)")
		Consistently(field(ns, "lr/broken", "{.status.phase}")).WithTimeout(10 * time.Second).WithPolling(500 * time.Millisecond).Should(Equal("Granted"))
		_, err = kubectl("turnstile", "-n", ns, "run", "-l", lock, "--owner", "bob", "--nonblock", "--", "true")
		Expect(exitCode(err)).To(Equal(75))
		Expect(stderrOf(err)).To(ContainSubstring("kept after a failed run"))
		mustKubectl("turnstile", "-n", ns, "release", "broken")
		mustKubectl("turnstile", "-n", ns, "run", "-l", lock, "--owner", "bob", "-w", "20s", "--", "true")
	})

	It("stops a holder cut off from the API server (black hole) before the next holder starts", SpecPriority(9), func() {
		proxy := newBlackHole(env.Config.Host)
		DeferCleanup(proxy.Close)
		cut := proxiedKubeconfig(proxy.Addr())
		a := startRun(cut, runArgs("alice", "--pull", "1", "--lease-duration", "12s", "--grace", "3s"),
			trees.command("a", `trap 'echo stopping; $alive 25; exit 0' TERM; $alive 600 & wait; wait`))
		b := second(a)
		By("the proxy stops forwarding without closing anything")
		proxy.Cut()
		Eventually(b, 60*time.Second).Should(gexec.Exit())
		Eventually(a, 90*time.Second).Should(gexec.Exit())
		gaps := trees.expectSerial("a", "b")
		Expect(a.ExitCode()).To(Equal(76), "the lock was lost while the command ran")
		Expect(b.ExitCode()).To(Equal(0))
		GinkgoWriter.Printf("black hole: the next holder's command started %s after the cut-off tree's last process\n", gaps[0])
	})

	It("retries its release until the API server answers (a partition as the command exits)", SpecPriority(3), func() {
		proxy := newBlackHole(env.Config.Host)
		DeferCleanup(proxy.Close)
		cut := proxiedKubeconfig(proxy.Addr())
		exiting := filepath.Join(GinkgoT().TempDir(), "exiting")
		a := startRun(cut, runArgs("alice", "--pull", "1", "--name", "cut-release", "--lease-duration", "30s", "--grace", "1s"),
			[]string{"sh", "-c", "touch " + exiting + "; sleep 2"})
		Eventually(func() error { _, err := os.Stat(exiting); return err }, settle, poll).Should(Succeed())
		By("the proxy stops forwarding as the command exits: run's first release gets no answer")
		proxy.Cut()
		Eventually(a.Err, 30*time.Second).Should(gbytes.Say(`warning: release: .*; retrying for up to`))
		Expect(jsonpath(ns, "lr/cut-release", "{.status.phase}")).To(Equal("Granted"), "the lost release did not land")
		By("the network heals: the stalled connections are reset, new ones are forwarded")
		proxy.Heal()
		Eventually(a, 30*time.Second).Should(gexec.Exit(0))
		Expect(a.Err).To(gbytes.Say(`released after \d+ attempts`))
		Expect(jsonpath(ns, "lr/cut-release", "{.status.phase}")).To(Equal("Released"), "released by run, not passed on by the Lease's lapse")
	})
})

// blackHole is a TCP proxy that can stop forwarding without closing any connection, as a
// network that drops packets does.
type blackHole struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	hold   chan struct{}
}

func newBlackHole(targetURL string) *blackHole {
	GinkgoHelper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	target := hostPort(targetURL)
	p := &blackHole{ln: ln, target: target, hold: make(chan struct{})}
	go p.serve()
	return p
}

func (p *blackHole) Addr() string { return p.ln.Addr().String() }

// Cut stops forwarding: bytes read are dropped, nothing is written, nothing is closed.
func (p *blackHole) Cut() { p.cut.Store(true) }

// Heal ends the partition as networks often do: the connections it stalled are reset, and new
// ones are forwarded again.
func (p *blackHole) Heal() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	p.cut.Store(false)
	for _, c := range conns {
		_ = c.Close()
	}
}

func (p *blackHole) Close() {
	_ = p.ln.Close()
	close(p.hold)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *blackHole) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *blackHole) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		if p.cut.Load() {
			continue // accepted, never answered
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(up)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst until the cut; after it, it reads and drops.
func (p *blackHole) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && p.cut.Load() {
				<-p.hold
			}
			return
		}
	}
}

// proxiedKubeconfig is the admin's kubeconfig with the server at addr.
func proxiedKubeconfig(addr string) string {
	GinkgoHelper()
	b, err := os.ReadFile(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	host := hostPort(env.Config.Host)
	Expect(string(b)).To(ContainSubstring(host))
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(path, bytes.ReplaceAll(b, []byte(host), []byte(addr)), 0o600)).To(Succeed())
	return path
}

// hostPort is the host:port of a rest.Config's Host, which may or may not be a URL.
func hostPort(host string) string {
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		return u.Host
	}
	return strings.TrimSuffix(host, "/")
}
