package pyrmq.interop;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * What every interop program shares: argument parsing, client settings for loopback, the
 * deterministic message body, and the one-line-per-event output that tests/interop/harness.py parses.
 *
 * <p>Output lines go to stdout, one per event, flushed at once; diagnostics go to stderr.
 */
final class Common {
    /** Exit codes, shared with harness.py. */
    static final int EXIT_OK = 0;
    static final int EXIT_FAILED = 1;
    static final int EXIT_USAGE = 2;
    static final int EXIT_TIMEOUT = 3;
    static final int EXIT_WATCHDOG = 4;

    private Common() {
    }

    /** Positional arguments followed (or interleaved) by --name=value options. */
    static final class Args {
        final List<String> positional = new ArrayList<>();
        final Map<String, String> options = new HashMap<>();

        static Args parse(String[] argv, int required, String usage) {
            Args args = new Args();
            for (String arg : argv) {
                if (arg.startsWith("--")) {
                    int eq = arg.indexOf('=');
                    if (eq < 0) {
                        usage(usage, "option without a value: " + arg);
                    }
                    args.options.put(arg.substring(2, eq), arg.substring(eq + 1));
                } else {
                    args.positional.add(arg);
                }
            }
            if (args.positional.size() != required) {
                usage(usage, "expected " + required + " positional arguments, got " + args.positional);
            }
            return args;
        }

        String get(int index) {
            return positional.get(index);
        }

        int getInt(int index) {
            return Integer.parseInt(positional.get(index));
        }

        String option(String name, String defaultValue) {
            return options.getOrDefault(name, defaultValue);
        }

        int intOption(String name, int defaultValue) {
            String value = options.get(name);
            return value == null ? defaultValue : Integer.parseInt(value);
        }
    }

    static void usage(String usage, String problem) {
        System.err.println("usage: " + usage);
        System.err.println(problem);
        System.exit(EXIT_USAGE);
    }

    /**
     * Loopback settings shared by every client: no VIP channel (port - 2), the client's own address
     * on 127.0.0.1, and route polls, heartbeats and offset commits every second instead of every
     * 5 to 30 seconds, so that tests see changes quickly.
     */
    static void configureClient(ClientConfig config, String namesrv, String instanceName) {
        config.setNamesrvAddr(namesrv);
        config.setVipChannelEnabled(false);
        config.setClientIP("127.0.0.1");
        config.setInstanceName(instanceName + "-" + ProcessHandle.current().pid());
        config.setPollNameServerInterval(1000);
        config.setHeartbeatBrokerInterval(1000);
        config.setPersistConsumerOffsetInterval(1000);
        config.setMqClientApiTimeout(3000);
        config.setClientCallbackExecutorThreads(2);
    }

    /**
     * The body of the message with this key: the UTF-8 bytes of "key|" repeated and cut to
     * bodyBytes. harness.expected_body() is its Python twin.
     */
    static byte[] body(String key, int bodyBytes) {
        byte[] unit = (key + "|").getBytes(StandardCharsets.UTF_8);
        byte[] body = new byte[bodyBytes];
        for (int i = 0; i < bodyBytes; i++) {
            body[i] = unit[i % unit.length];
        }
        return body;
    }

    static long crc32(byte[] data) {
        CRC32 crc = new CRC32();
        crc.update(data);
        return crc.getValue();
    }

    static synchronized void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static synchronized void err(String line) {
        System.err.println(line);
        System.err.flush();
    }

    /** RECEIVED key reconsumeTimes queueId queueOffset bodyBytes bodyCrc32 tags */
    static void printReceived(MessageExt msg) {
        byte[] body = msg.getBody() == null ? new byte[0] : msg.getBody();
        String key = msg.getKeys() == null ? "-" : msg.getKeys();
        String tags = msg.getTags() == null ? "-" : msg.getTags();
        out("RECEIVED " + key + " " + msg.getReconsumeTimes() + " " + msg.getQueueId() + " "
            + msg.getQueueOffset() + " " + body.length + " " + crc32(body) + " " + tags);
    }

    /**
     * Halts the JVM if it is still running seconds from now: a hung client shutdown must never
     * outlive its test. harness.py kills the process too; this is the second line.
     */
    static void watchdog(long seconds) {
        Thread thread = new Thread(() -> {
            try {
                Thread.sleep(seconds * 1000L);
            } catch (InterruptedException e) {
                return;
            }
            err("WATCHDOG halting after " + seconds + " s");
            Runtime.getRuntime().halt(EXIT_WATCHDOG);
        }, "pyrmq-watchdog");
        thread.setDaemon(true);
        thread.start();
    }
}
