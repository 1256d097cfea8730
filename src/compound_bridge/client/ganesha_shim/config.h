/* Stands in for the config.h that CMake generates into Ganesha's build tree.
 *
 * nfsv41.h includes gsh_rpc.h, which includes "config.h". The txnfs-nfs client compiles
 * nfsv41.h straight from the Ganesha source tree, without configuring Ganesha, so this
 * empty file answers that include. What the real config.h would decide for these headers:
 * _HAVE_GSSAPI (only SECINFO's RPCSEC_GSS member, which the client never sends or
 * decodes), RPC_VSOCK, USE_DBUS, HAVE_STRLCPY/HAVE_STRNLEN (declarations of server-side
 * helpers) -- nothing in the layout or encoding of the operations the client uses.
 */
