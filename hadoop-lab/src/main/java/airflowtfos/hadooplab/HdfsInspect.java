package airflowtfos.hadooplab;

import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * What HDFS holds under some paths, as Hadoop's own client sees it (over RPC, from the lab's site files): one
 * JSON object on standard output, so that tests check what another client wrote without trusting that client.
 *
 * <pre>
 * java -cp ... airflowtfos.hadooplab.HdfsInspect --conf DIR PATH...
 * {"fs": "hdfs://127.0.0.1:PORT", "paths": {"PATH": null | [entry, ...]}}
 * </pre>
 *
 * Each PATH that exists gives itself and, for a directory, everything under it, each entry with {@code path}
 * (absolute), {@code type} (FILE or DIRECTORY), {@code permission} (octal, e.g. "700"), {@code owner},
 * {@code group}, {@code length}, {@code replication} and, for a file, {@code sha256} of its content and, up to
 * 64 KiB, the content itself as {@code text} when it is UTF-8 (else {@code binary}: true).
 */
public final class HdfsInspect {
    private static final long TEXT_LIMIT = 64 * 1024;

    private HdfsInspect() {
    }

    public static void main(String[] args) throws Exception {
        String confDir = null;
        String principal = null;
        String keytab = null;
        List<String> paths = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if ("--conf".equals(args[i]) && i + 1 < args.length) {
                confDir = args[++i];
            } else if ("--login".equals(args[i]) && i + 2 < args.length) {
                principal = args[++i];
                keytab = args[++i];
            } else {
                paths.add(args[i]);
            }
        }
        if (confDir == null || paths.isEmpty()) {
            System.err.println("usage: HdfsInspect --conf DIR [--login PRINCIPAL KEYTAB] PATH...");
            System.exit(2);
        }
        Configuration conf = new Configuration();
        conf.addResource(new Path(confDir, "core-site.xml"));
        conf.addResource(new Path(confDir, "hdfs-site.xml"));
        if (principal != null) {  // a secure lab: log in from the keytab (a ticket cache is never read)
            UserGroupInformation.setConfiguration(conf);
            UserGroupInformation.loginUserFromKeytab(principal, keytab);
        }
        Map<String, Object> found = new LinkedHashMap<>();
        try (FileSystem fs = FileSystem.newInstance(conf)) {
            for (String path : paths) {
                Path p = new Path(path);
                if (!fs.exists(p)) {
                    found.put(path, null);
                    continue;
                }
                List<Object> entries = new ArrayList<>();
                walk(fs, fs.getFileStatus(p), entries);
                found.put(path, entries);
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("fs", fs.getUri().toString());
            out.put("client", fs.getClass().getName());
            out.put("paths", found);
            System.out.println(Json.object(out));
        }
    }

    private static void walk(FileSystem fs, FileStatus status, List<Object> entries) throws Exception {
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("path", status.getPath().toUri().getPath());
        entry.put("type", status.isDirectory() ? "DIRECTORY" : "FILE");
        entry.put("permission", Integer.toOctalString(status.getPermission().toShort()));
        entry.put("owner", status.getOwner());
        entry.put("group", status.getGroup());
        entry.put("length", status.getLen());
        entry.put("modificationTime", status.getModificationTime());
        entry.put("replication", (int) status.getReplication());
        if (status.isFile()) {
            read(fs, status, entry);
        }
        entries.add(entry);
        if (status.isDirectory()) {
            for (FileStatus child : fs.listStatus(status.getPath())) {
                walk(fs, child, entries);
            }
        }
    }

    private static void read(FileSystem fs, FileStatus status, Map<String, Object> entry) throws Exception {
        MessageDigest digest = MessageDigest.getInstance("SHA-256");
        ByteArrayOutputStream small = status.getLen() <= TEXT_LIMIT ? new ByteArrayOutputStream() : null;
        byte[] buffer = new byte[65536];
        try (InputStream in = fs.open(status.getPath())) {
            for (int n = in.read(buffer); n >= 0; n = in.read(buffer)) {
                digest.update(buffer, 0, n);
                if (small != null) {
                    small.write(buffer, 0, n);
                }
            }
        }
        entry.put("sha256", HexFormat.of().formatHex(digest.digest()));
        if (small != null) {
            // only what is text: a binary file (a checkpoint, a plot) has no "text"
            try {
                entry.put("text", StandardCharsets.UTF_8.newDecoder()
                    .decode(java.nio.ByteBuffer.wrap(small.toByteArray())).toString());
            } catch (java.nio.charset.CharacterCodingException binary) {
                entry.put("binary", true);
            }
        }
    }
}
