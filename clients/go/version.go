package pgidem

// Version is this module's release. Go has no manifest version (a module's version is its
// repository's tag, clients/go/vX.Y.Z for a module in a subdirectory): this constant is the one
// place the repository says it; clients/go/pack.sh names the module zip after it.
const Version = "0.1.0"
