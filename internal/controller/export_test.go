package controller

// RequestCommands exposes the CommandLock reconciler's LockRequest mapping to the suite.
var RequestCommands = (*CommandLockReconciler).requestCommands
