package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"github.com/onsi/gomega/gexec"
	"golang.org/x/sys/unix"

	"github.com/turnstile-dev/turnstile/internal/proctree"
)

// These specs stop `run` and its keeper the ways a terminal and a user can, and judge from the
// commands' records (runTrees) that the first tree never outlived the lease: its last record is
// older than the next holder's start.

// terminal is an interactive bash with job control in a real pseudo-terminal: what a user types
// is written to the master side, as a terminal emulator writes it (^Z is 0x1a, and the line
// discipline turns it into SIGTSTP for the foreground process group).
type terminal struct {
	master *os.File
	bash   *exec.Cmd
	mu     sync.Mutex
	screen bytes.Buffer
}

func newTerminal() *terminal {
	GinkgoHelper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	Expect(err).NotTo(HaveOccurred())
	fd := int(master.Fd())
	Expect(unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0)).To(Succeed())
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	Expect(err).NotTo(HaveOccurred())
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	Expect(err).NotTo(HaveOccurred())
	bash := exec.Command("bash", "--norc", "--noprofile", "-i")
	bash.Stdin, bash.Stdout, bash.Stderr = slave, slave, slave
	bash.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "KUBECACHEDIR="+cacheDir, "PS1=$ ", "TERM=dumb")
	bash.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	Expect(bash.Start()).To(Succeed())
	_ = slave.Close()
	t := &terminal{master: master, bash: bash}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			t.mu.Lock()
			t.screen.Write(buf[:n])
			t.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	DeferCleanup(func() {
		_ = syscall.Kill(-bash.Process.Pid, syscall.SIGKILL) // the session's jobs are in groups of their own
		_ = bash.Process.Kill()
		_ = bash.Wait()
		_ = master.Close()
		GinkgoWriter.Printf("terminal:\n%s\n", t.text())
	})
	Eventually(t.text, settle).Should(ContainSubstring("$ "), "bash never prompted")
	return t
}

func (t *terminal) text() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.screen.String()
}

// typed writes what a user types.
func (t *terminal) typed(s string) {
	GinkgoHelper()
	_, err := t.master.WriteString(s)
	Expect(err).NotTo(HaveOccurred())
}

// shellQuote quotes argv for bash.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// runProcess finds the run whose tree is id (its keeper's parent) and its keeper.
func runProcess(trees *runTrees) (run, keeper int) {
	GinkgoHelper()
	Eventually(func() int {
		for _, pid := range trees.alive() {
			for p := pid; p > 1; {
				st, err := proctree.Read(p)
				if err != nil {
					break
				}
				cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
				if bytes.Contains(cmdline, []byte("--internal-keeper")) {
					run, keeper = st.PPID, p
					return keeper
				}
				p = st.PPID
			}
		}
		return 0
	}, settle, poll).ShouldNot(BeZero(), "no keeper found above the tree")
	return run, keeper
}

var _ = Describe("kubectl turnstile run under job control", func() {
	var (
		ns    string
		trees *runTrees
		lock  string
	)
	BeforeEach(func() {
		ns = createNamespace()
		trees = newRunTrees()
		lock = "acme/infra:jobs-" + randSuffix()
	})
	// firstArgs are run's flags for the first tree: a short lease, so a lapse comes within
	// seconds; typed is the line that runs it at a terminal.
	firstArgs := func(lease string) []string {
		return []string{"-n", ns, "run", "-l", lock, "--owner", "alice", "--pull", "1", "--lease-duration", lease, "--grace", "1s"}
	}
	typed := func(lease, body string) string {
		argv := append(append([]string{kubectlBin, "turnstile"}, firstArgs(lease)...), "--")
		return shellQuote(append(argv, trees.command("a", body)...)) + "\n"
	}
	// next starts the next holder, waiting behind the first.
	next := func() *gexec.Session {
		GinkgoHelper()
		b := startRun("", []string{"-n", ns, "run", "-l", lock, "--owner", "bob", "--pull", "2"}, trees.command("b", "$alive 3"))
		Eventually(b.Err, settle).Should(gbytes.Say("waiting"))
		return b
	}

	It("Ctrl-Z at a terminal: the command is suspended with run, and stopped before the lease can lapse", SpecPriority(4), func() {
		term := newTerminal()
		term.typed(typed("10s", `$alive 600`))
		trees.waitStarted("a")
		b := next()
		By("^Z: run and the command are suspended; the keeper is not")
		term.typed("\x1a")
		Eventually(term.text, settle).Should(ContainSubstring("Stopped"), "bash reports the job stopped")
		run, keeper := runProcess(trees)
		Eventually(func() byte { p, _ := proctree.Read(run); return p.State }, settle, poll).Should(Equal(byte('T')))
		Expect(proctree.Read(keeper)).To(HaveField("State", Not(Equal(byte('T')))), "the keeper must not be stopped with run")
		By("nobody continues the job: the next holder starts only once the first tree is gone")
		Eventually(b, 60*time.Second).Should(gexec.Exit(0))
		gaps := trees.expectSerial("a", "b")
		GinkgoWriter.Printf("Ctrl-Z: the next tree started %s after the suspended tree's last record\n", gaps[0])
		By("fg: run learns it lost the locks, and exits 76")
		term.typed("fg\n")
		Eventually(term.text, 30*time.Second).Should(ContainSubstring("stopping"))
		term.typed("echo code=$?\n")
		Eventually(term.text, 30*time.Second).Should(ContainSubstring("code=76"))
	})

	It("Ctrl-Z and fg within the lease: the command goes on under the lock and finishes", SpecPriority(3), func() {
		term := newTerminal()
		term.typed(typed("30s", `$alive 60`))
		trees.waitStarted("a")
		b := next()
		term.typed("\x1a")
		Eventually(term.text, settle).Should(ContainSubstring("Stopped"))
		run, _ := runProcess(trees)
		Eventually(func() byte { p, _ := proctree.Read(run); return p.State }, settle, poll).Should(Equal(byte('T')))
		term.typed("fg\n")
		term.typed("echo code=$?\n")
		Eventually(term.text, 60*time.Second).Should(ContainSubstring("code=0"), "the command finished with its own status")
		Eventually(b, 30*time.Second).Should(gexec.Exit(0))
		trees.expectSerial("a", "b")
	})

	It("SIGSTOP to run's process group: the keeper stops the tree before the lease can lapse", SpecPriority(4), func() {
		a := startRun("", firstArgs("10s"), trees.command("a", `$alive 600`))
		trees.waitStarted("a")
		b := next()
		Expect(syscall.Kill(-a.Command.Process.Pid, syscall.SIGSTOP)).To(Succeed())
		Eventually(b, 60*time.Second).Should(gexec.Exit(0))
		trees.expectSerial("a", "b")
		Expect(syscall.Kill(-a.Command.Process.Pid, syscall.SIGCONT)).To(Succeed())
		Eventually(a, 30*time.Second).Should(gexec.Exit(76))
	})

	It("SIGSTOP to the keeper, then to run: run continues the stopped keeper, which then stops the tree", SpecPriority(4), func() {
		a := startRun("", firstArgs("10s"), trees.command("a", `$alive 600`))
		trees.waitStarted("a")
		b := next()
		run, keeper := runProcess(trees)
		Expect(run).To(Equal(a.Command.Process.Pid))
		Expect(syscall.Kill(keeper, syscall.SIGSTOP)).To(Succeed())
		Eventually(a.Err, settle).Should(gbytes.Say("the keeper .* was stopped; continuing it"))
		Eventually(func() byte { p, _ := proctree.Read(keeper); return p.State }, settle, poll).ShouldNot(Equal(byte('T')))
		Expect(syscall.Kill(run, syscall.SIGSTOP)).To(Succeed())
		Eventually(b, 60*time.Second).Should(gexec.Exit(0))
		trees.expectSerial("a", "b")
		Expect(syscall.Kill(run, syscall.SIGCONT)).To(Succeed())
		Eventually(a, 30*time.Second).Should(gexec.Exit(76))
	})
})
