package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// A new user's slips, refused with what to write instead (issue #28).
var _ = Describe("The plugin's refusals", func() {
	It("refuses to freeze a misspelt command, suggests the one meant, and freezes a new name only when asked", func() {
		_, err := kubectl("turnstile", "freeze", "aply")
		Expect(err).To(HaveOccurred())
		Expect(stderrOf(err)).To(ContainSubstring(`freeze "aply": no such command: did you mean apply?`))
		Expect(stderrOf(err)).To(ContainSubstring("--new-command"))
		_, err = kubectl("get", "commandlock", "aply")
		Expect(err).To(HaveOccurred(), "the refused freeze created a CommandLock")

		name := "deploy-" + randSuffix()
		DeferCleanup(func() { _, _ = kubectl("delete", "commandlock", name, "--ignore-not-found") })
		Expect(mustKubectl("turnstile", "freeze", name, "--new-command")).To(ContainSubstring("commandlock/" + name + " frozen"))
		// Now that its CommandLock exists the name is known: no flag needed to freeze it again.
		mustKubectl("turnstile", "thaw", name)
		Expect(mustKubectl("turnstile", "freeze", name)).To(ContainSubstring("commandlock/" + name + " frozen"))
		// A known command needs no flag either (and is thawed at once: other specs use apply).
		DeferCleanup(func() { _, _ = kubectl("turnstile", "thaw", "import") })
		Expect(mustKubectl("turnstile", "freeze", "import")).To(ContainSubstring("commandlock/import frozen"))
	})

	It("takes --priority in any case and lists the valid values when refusing one", func() {
		ns := createNamespace()
		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:app", "--priority", "high", "--name", "hi", "--no-wait")
		Eventually(field(ns, "lr/hi", "{.spec.priority}")).WithTimeout(settle).WithPolling(poll).Should(Equal("High"))

		_, err := kubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:app", "--priority", "urgent")
		Expect(err).To(HaveOccurred())
		Expect(stderrOf(err)).To(ContainSubstring(`invalid argument "urgent" for "--priority" flag: valid values are Low, Normal, High, Critical`))
	})
})
