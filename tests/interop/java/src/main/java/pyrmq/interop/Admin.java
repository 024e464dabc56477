package pyrmq.interop;

import java.util.Arrays;
import org.apache.commons.cli.CommandLine;
import org.apache.commons.cli.DefaultParser;
import org.apache.commons.cli.Options;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.srvutil.ServerUtil;
import org.apache.rocketmq.tools.command.MQAdminStartup;
import org.apache.rocketmq.tools.command.SubCommand;

/**
 * Runs one mqadmin sub-command (org.apache.rocketmq.tools.command.MQAdminStartup's commands) and
 * exits with a status that says whether it worked: MQAdminStartup itself prints a failed
 * command's stack trace and still exits 0.
 *
 * <pre>
 *   Admin clusterList -n 127.0.0.1:9876      (exit 0: done; 1: the command failed; 2: usage)
 * </pre>
 */
public final class Admin extends MQAdminStartup {
    private Admin() {
    }

    public static void main(String[] argv) {
        if (argv.length == 0) {
            Common.usage("Admin <mqadmin sub-command> [options]", "no sub-command");
        }
        Common.watchdog(120);
        // As MQAdminStartup.main0 does: requests carry this client's version.
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        initCommand();
        SubCommand command = SUB_COMMANDS.stream()
            .filter(c -> c.commandName().equals(argv[0])
                || (c.commandAlias() != null && c.commandAlias().equals(argv[0])))
            .findFirst()
            .orElse(null);
        if (command == null) {
            Common.usage("Admin <mqadmin sub-command> [options]", "unknown sub-command " + argv[0]);
            return;
        }
        String[] subArgs = Arrays.copyOfRange(argv, 1, argv.length);
        Options options = command.buildCommandlineOptions(ServerUtil.buildCommandlineOptions(new Options()));
        CommandLine commandLine = ServerUtil.parseCmdLine("mqadmin " + command.commandName(), subArgs,
            options, new DefaultParser());
        if (commandLine == null) {
            System.exit(Common.EXIT_USAGE);
        }
        if (commandLine.hasOption('n')) {
            System.setProperty(MixAll.NAMESRV_ADDR_PROPERTY, commandLine.getOptionValue('n'));
        }
        try {
            command.execute(commandLine, options, null);
        } catch (Exception e) {
            System.out.flush();
            e.printStackTrace();
            System.exit(Common.EXIT_FAILED);
        }
        System.out.flush();
        System.exit(Common.EXIT_OK);
    }
}
